"""The geometric instrument: what the theory speaks of, computed.

* :mod:`.geometry` — the public namespace of: :mod:`.effective` (effective Hessian ``H_eff = G + M``,
  pullback metric, matrix-free products), :mod:`.premises` (premises report, the one sign tolerance),
  :mod:`.whitening` (Thm 3.1), :mod:`.thm41` (Thm 4.1 premises and conclusion), :mod:`.equilibria`
  (collapsed equilibria constructed and certified);
* :mod:`.riemann` — Christoffel symbols and Riemann/Ricci/sectional curvature of a metric field;
* :mod:`.metrics` — effective rank, conditioning, orbit and trajectory statistics.

Takes functions and pytrees; needs no trainer. Linear algebra comes from :mod:`ssl_geometry._src.linalg`.
"""
