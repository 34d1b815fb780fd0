"""MapSmith: a geoprocessing server for AI agents that validates, verifies and records every step.

Importing this package must stay cheap (the MCP server answers ``tools/list`` before any engine is
loaded), so nothing here imports an engine.
"""

from importlib import metadata

try:
    __version__ = metadata.version("mapsmith")
except metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.1.0"
