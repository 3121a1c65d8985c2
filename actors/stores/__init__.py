"""Backing stores of channels: the contract, the embedded segment log, group commit."""
