"""Pictures: attention heat maps, training curves, confusion matrices (matplotlib, Agg backend)."""
