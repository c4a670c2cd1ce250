"""What acceld says to a hypervisor: the device XML of an attach handle (issue 22)."""
