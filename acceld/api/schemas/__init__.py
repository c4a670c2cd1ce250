"""JSON schemas for every request body and query, one constant per variant."""
