"""All SQL lives here. Each public function is exactly one transaction."""
