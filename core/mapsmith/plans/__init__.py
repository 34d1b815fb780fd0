"""Analysis plans: a goal and typed steps, validated before any file is touched.

``model`` parses and fingerprints a plan, ``findings`` holds what validation reports and the table of
its codes, ``validate`` checks a plan against the catalog and simulates what flows between steps,
``explain`` narrates a valid plan from declared fields only. This package exports; it holds no logic.
"""

from mapsmith.plans.explain import explain_plan
from mapsmith.plans.findings import FINDING_CODES, Finding
from mapsmith.plans.model import Plan, Step, parse_plan, plan_fingerprint, references, substitute
from mapsmith.plans.validate import PlanValidation, validate_plan

__all__ = [
    "FINDING_CODES",
    "Finding",
    "Plan",
    "PlanValidation",
    "Step",
    "explain_plan",
    "parse_plan",
    "plan_fingerprint",
    "references",
    "substitute",
    "validate_plan",
]
