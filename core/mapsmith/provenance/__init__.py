"""Provenance manifests: the record MapSmith writes beside every dataset, and how it is checked.

The format is the published specification ``manifest-v1`` (a copy of its schema ships in this
package). This package must never emit or accept a record that contradicts that specification.
"""
