"""Linear algebra of large symmetric operators: dense Hessians, HVPs, Lanczos, traces, certificates.

Everything takes a matvec (or a function and a pytree), never a module.
"""
