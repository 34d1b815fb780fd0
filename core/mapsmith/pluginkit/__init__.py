"""Tools for plugin authors: ``mapsmith plugin new`` (a template), ``plugin check`` (conformance), isolation.

``new`` writes a working operation plugin, ``check`` runs a plugin's contracts and examples through the real
runner inside MapSmith's one sandbox for untrusted code (``isolation.run_isolated`` over
``mapsmith.sandbox.jail``) and reports one named rule per line, and ``promote`` (maturity) records the
evidence that makes a plugin's operation stable. Importing this package must stay cheap: submodules are
imported by name, never here, and nothing here may run plugin code.
"""
