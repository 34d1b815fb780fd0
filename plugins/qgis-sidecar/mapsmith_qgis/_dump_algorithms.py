"""Run by QGIS's own Python in a subprocess (never imported by MapSmith): print every Processing
algorithm's parameter and output definitions as JSON, in the shape ``qgis_process --json help`` uses.

One process for every algorithm instead of one ``qgis_process --json help`` per algorithm (about 2 s
each, 341 of them). ``raw_definition`` is the parameter's own ``toVariantMap()``, which is what
``qgis_process`` prints under the same key. ``text`` is QGIS's own help for the algorithm
(``shortHelpString``, ``shortDescription``, display name, group, tags): what discovery ranks a ``qgis:``
entry on (``qgis_process --json list`` carries no help text).
"""

import json
import sys


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    is_null = getattr(value, "isNull", None)
    if callable(is_null):
        try:
            if is_null():
                return None
        except TypeError:
            pass
    return str(value)


def main():
    from qgis.core import QgsApplication, QgsProcessingParameterDefinition

    app = QgsApplication([], False)
    app.initQgis()
    sys.path.append(QgsApplication.pkgDataPath() + "/python/plugins")
    from processing.core.Processing import Processing

    Processing.initialize()
    optional = QgsProcessingParameterDefinition.FlagOptional
    out = {}
    for alg in QgsApplication.processingRegistry().algorithms():
        parameters = {}
        for p in alg.parameterDefinitions():
            raw = _plain(p.toVariantMap())
            parameters[p.name()] = {
                "name": p.name(),
                "description": p.description(),
                "optional": bool(p.flags() & optional),
                "is_destination": bool(p.isDestination()),
                "default_value": raw.get("default"),
                "raw_definition": raw,
                "type": {"id": p.type()},
            }
        outputs = {o.name(): {"description": o.description(), "type": o.type()} for o in alg.outputDefinitions()}
        text = {
            "name": alg.displayName(),
            "group": alg.group(),
            "tags": [str(t) for t in alg.tags()],
            "short_description": alg.shortDescription() or "",
            "short_help": alg.shortHelpString() or "",
        }
        out[alg.id()] = {"parameters": parameters, "outputs": outputs, "text": text}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
