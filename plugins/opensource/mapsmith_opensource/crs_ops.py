"""(being written) Operations of the opensource stack; see REGISTRATIONS."""

from __future__ import annotations

from mapsmith_opensource.registration import Registration

REGISTRATIONS: tuple[Registration, ...] = ()
