"""Wire formats without I/O: what jobgate and the providers send and accept, as bytes and
JSON, independent of how it travels. The simulator and the adapters both import from here."""
