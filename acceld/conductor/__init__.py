"""The conductor: owns inventory and state, applies reports, dispatches host work."""
