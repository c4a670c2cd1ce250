"""Process entry points: parse configuration once, wire the pieces, run."""
