"""experiments/claims/combine.py: a claim-level ``why`` leads with the record at the largest scale (a paper-scale
record before a smoke one), whatever order the records were read in."""

from experiments import claims

RANK = "thm4.1-rank-predicts-stability"  # combine: theorem, decisive at toy, smoke and paper


def _r(verdict, scale, experiment, reason):
    return {
        "id": RANK,
        "verdict": verdict,
        "scale": scale,
        "decisive": True,
        "subject": None,
        "experiment": experiment,
        "reason": reason,
    }


SMOKE = _r("supported", "smoke", "collapse_hessians", "32 counted heads")
PAPER = _r("supported", "paper", "collapse_hessians-paper_widths", "157 counted heads")


def test_the_paper_record_leads_the_why_in_either_order():
    for records in ([SMOKE, PAPER], [PAPER, SMOKE]):
        v = claims.claim_verdict(RANK, records)
        assert v["verdict"] == "supported" and v["scale"] == "paper"
        assert v["why"] == (
            "2 of 2 decisive records support it and none refutes it or is undecided "
            "(collapse_hessians-paper_widths, collapse_hessians) -- collapse_hessians-paper_widths: 157 counted heads"
        )
        # the experiments list keeps the order the records were given in
        assert v["experiments"] == [r["experiment"] for r in records]


def test_within_one_scale_the_order_given_is_kept():
    a = _r("not supported", "smoke", "a", "first")
    b = _r("not supported", "smoke", "b", "second")
    assert claims.claim_verdict(RANK, [a, b])["why"].endswith("-- a: first")
    assert claims.claim_verdict(RANK, [b, a])["why"].endswith("-- b: second")
    toy = _r("not supported", "toy", "t", "toy first")
    assert claims.claim_verdict(RANK, [toy, a])["why"].endswith("-- a: first")  # smoke outranks toy
