"""Provider adapters behind one Protocol; each classifies its failures once (see errors)."""
