"""Engine adapters: how servediff launches, asks and stops each serving stack."""
