"""The walk: the engine that walks a playbook's tree, the runner that measures each node's probe, and the session that ties a target, a walk and its findings together."""
