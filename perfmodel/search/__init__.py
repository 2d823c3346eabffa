"""Parallelism-configuration search: enumerate (``space``), cost in one batched pass and rank
(``engine``), explain the choice (``explain``) and print it for a framework (``emit``)."""
from perfmodel.search.engine import OBJECTIVES, SearchResult, run_search, search
from perfmodel.search.space import REASONS, Space, enumerate_space, structural_violations

__all__ = [
    "search", "run_search", "SearchResult", "OBJECTIVES",
    "enumerate_space", "structural_violations", "Space", "REASONS",
]
