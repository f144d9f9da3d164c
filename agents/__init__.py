"""The agents under optimization, written against `optimizer`'s public API only."""
