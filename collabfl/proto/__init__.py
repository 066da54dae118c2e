"""Protocol buffers and generated gRPC modules (regenerate with proto/generate.py)."""
