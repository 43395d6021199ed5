"""Memory: device-object dispatch, allocators, the device -> host -> disk store, and the host's cycle collector."""
