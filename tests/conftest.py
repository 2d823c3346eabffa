"""Shared test settings.

Hypothesis profiles: ``default`` (random examples, no per-example deadline: the first call of a
test pays for imports and YAML loading) and ``ci`` (derandomized, so a CI failure reproduces);
choose with ``HYPOTHESIS_PROFILE=ci pytest``.
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
