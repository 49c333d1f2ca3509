"""A sweep's nights read back and compared: each GPU against its own past nights."""
