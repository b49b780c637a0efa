"""greedy_generate's end-of-sequence stop, against a hand-computed sequence: each step's logits pick a known
token, a row that chose an eos id gets pad ids afterwards, and generation ends when every row has finished."""
import numpy as np

from builder.generation import greedy_generate

# the token each row chooses at each step, whatever the input
PLAN = np.array([[5, 2, 8, 8, 8, 8], [6, 6, 9, 3, 1, 1]])


def _steps():
    state = {"step": 0}

    def logits():
        out = np.zeros((2, 1, 10), np.float32)
        out[np.arange(2), 0, PLAN[:, state["step"]]] = 1.0
        state["step"] += 1
        return out

    return (lambda ids, cache, n: logits()), (lambda ids, cache, n: logits())


def test_stops_when_every_row_has_finished():
    prefill, decode = _steps()
    got = greedy_generate(prefill, decode, np.zeros((2, 3), np.int64), 6, new_cache=dict, eos_token_ids=[2, 3],
                          pad_token_id=0)
    np.testing.assert_array_equal(got, [[5, 2, 0, 0], [6, 6, 9, 3]])


def test_without_eos_runs_to_the_end_and_one_int_is_one_id():
    prefill, decode = _steps()
    np.testing.assert_array_equal(greedy_generate(prefill, decode, np.zeros((2, 1), np.int64), 6, new_cache=dict),
                                  PLAN)
    prefill, decode = _steps()
    got, logits = greedy_generate(prefill, decode, np.zeros((2, 1), np.int64), 6, new_cache=dict, eos_token_ids=9,
                                  return_logits=True)
    np.testing.assert_array_equal(got, [[5, 2, 8, 8, 8, 8], [6, 6, 9, 9, 9, 9]])   # row 1 padded with the eos
    assert logits.shape == (2, 6, 10)
