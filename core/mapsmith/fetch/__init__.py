"""Fetching data from URLs under an operator's policy (``policy``) with a record of every byte (``http``).

Nothing here runs unless an operator lists hosts in ``MAPSMITH_FETCH_ALLOW``; see SECURITY.md.
"""

# The operations that open connections: in the sandbox they run in the one worker that shares the host's
# network (mapsmith.sandbox.proxy); every other call runs in workers that have none.
NETWORK_OPERATIONS = frozenset({"fetch_dataset", "fetch_raster", "query_overpass", "stac_search", "fetch_stac_asset"})
