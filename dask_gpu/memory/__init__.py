"""Device memory: device-object dispatch, allocators, and the device -> host -> disk store."""
