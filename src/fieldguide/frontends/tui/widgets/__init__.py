"""Reusable widgets: the playbook tree, the node panel, live readings."""
