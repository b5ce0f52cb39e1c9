"""Cutting `elmo embed`'s input into pieces and sharing them among processes."""

from __future__ import annotations

from elmo_core.apps.pieces import Piece, assign_pieces, plan_pieces


def test_pieces_cover_every_line_once_and_shares_balance_tokens(tmp_path):
    text = tmp_path / "in.txt"
    lengths = [5, 0, 17, 3, 40, 1, 9, 9, 0, 22] * 7
    text.write_text("".join(" ".join(["w"] * n) + "\r\n" for n in lengths), encoding="utf-8")
    pieces, lines, tokens, _ = plan_pieces(text, 30)
    assert (lines, tokens) == (len(lengths), sum(lengths))
    assert [(p.first_line, p.end_line) for p in pieces] == [
        (a.end_line if k else 0, b.end_line) for k, (a, b) in enumerate(zip([pieces[0], *pieces], pieces))
    ]
    assert pieces[-1].end_line == len(lengths)
    for p in pieces:  # a piece is one line, or lines of at most 30 tokens + 1 per line
        assert p.end_line - p.first_line == 1 or p.cost <= 30
        assert p.cost == sum(n + 1 for n in lengths[p.first_line : p.end_line])
    shares = assign_pieces(pieces, 3)
    assert sorted(p.index for share in shares for p in share) == list(range(len(pieces)))
    loads = [sum(p.cost for p in share) for share in shares]
    assert max(loads) - min(loads) <= max(p.cost for p in pieces)  # greedy: within one piece


def test_assign_gives_the_largest_pieces_first_to_the_least_loaded_rank():
    pieces = [Piece(i, i, i + 1, 0, 0, cost) for i, cost in enumerate([10, 50, 20, 30, 40])]
    shares = assign_pieces(pieces, 2)
    # 50 -> r0; 40 -> r1; 30 -> r1 (40 < 50); 20 -> r0 (50 < 70); 10 -> r0 (70 = 70: lower rank)
    assert [[p.cost for p in share] for share in shares] == [[10, 50, 20], [30, 40]]
