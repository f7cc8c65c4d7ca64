"""The geometric instrument: what the theory speaks of, computed.

* :mod:`.geometry` — effective Hessian ``H_eff = G + M``, premises, pullback metric, Thm 3.1/4.1;
* :mod:`.riemann` — Christoffel symbols and Riemann/Ricci/sectional curvature of a metric field;
* :mod:`.metrics` — effective rank, conditioning, orbit and trajectory statistics.

Takes functions and pytrees; needs no trainer. Linear algebra comes from :mod:`ssl_geometry.linalg`.
"""
