"""The machine and its processes, read from outside: NVML, ptrace access, the ranks of a job, fieldguide's own samplers and the watchdog that ends a launched job's tree."""
