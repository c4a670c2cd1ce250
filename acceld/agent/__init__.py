"""The agent: runs drivers on one host, reports to the conductor, never touches the DB."""
