"""Policy networks and the named configurations that build them."""
