"""Store code written once for both SQL dialects, one module per family, over `SqlPart`."""
