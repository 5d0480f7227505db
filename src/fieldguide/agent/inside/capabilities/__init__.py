"""Capability modules: each exposes CAPABILITY, a Capability subclass."""
