"""Pure, vectorized cost functions: numpy arrays in, numpy arrays out.

No pydantic, pandas or I/O here. Every function broadcasts over its arguments, so the same
code serves one ``estimate`` and a million-configuration search.
"""
