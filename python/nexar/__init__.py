"""libnexar from Python (minimal placeholder until the Python package lands;
the torch.distributed backend is the subpackage nexar.torch)."""
