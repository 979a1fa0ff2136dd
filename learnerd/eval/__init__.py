"""sway-compatible differential probes and the schema-1 report."""
