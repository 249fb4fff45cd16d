"""Whether the model fits the pools and how they are used: the memory fit, role shapes, replica and node bounds, idle
GPUs."""
