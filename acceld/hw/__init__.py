"""Hardware access for the agent's drivers: PCI addresses, sysfs, NVML, vendor tools."""
