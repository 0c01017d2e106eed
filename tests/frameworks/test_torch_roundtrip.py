"""test_torch_roundtrip.py — torch.save/torch.load through the mount give
back exactly the in-memory training state.

A TinyGPT (fwmodel.py) trained a few Adam steps is saved as the common
trainers do: model and optimizer state_dicts in separate files, plus one
combined "everything" file (model, optimizer, step, RNG state) written
through an open file object rather than a path.  Each is loaded back through
the mount and compared tensor by tensor (torch.equal) with deep copies of
the in-memory state; the loaded state must also resume training exactly
like the original.  After unmount (which drains) the backend files load to
the same state and `ckptfs-ctl verify` reports every one of them OK.
"""
import copy
import os

import torch

from fwmodel import TinyGPT, assert_same, make_optimizer, train, trained_model, trained_state

FILES = ("run/checkpoint-3/model.pt", "run/checkpoint-3/optimizer.pt", "run/checkpoint-3/state.pt")


def test_comparison_detects_a_changed_element():
    """assert_same is what the other tests rely on: it must catch one flipped value."""
    model_sd, opt_sd = trained_state(seed=0, steps=1)
    changed = copy.deepcopy(opt_sd)
    changed["state"][3]["exp_avg"].view(-1)[7] += 1.0
    try:
        assert_same(changed, opt_sd)
    except AssertionError as e:
        assert "state.state[3].exp_avg" in str(e), str(e)
    else:
        raise AssertionError("assert_same missed a changed element")


def _expected():
    torch.set_num_threads(1)
    model, opt = trained_model(seed=0, steps=3)
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 3,
             "rng": torch.get_rng_state()}
    return model, opt, copy.deepcopy(state)


def _save(root, state):
    ckdir = os.path.join(root, os.path.dirname(FILES[0]))
    os.makedirs(ckdir)
    torch.save(state["model"], os.path.join(root, FILES[0]))
    torch.save(state["optimizer"], os.path.join(root, FILES[1]))
    with open(os.path.join(root, FILES[2]), "wb") as f:
        torch.save(state, f)


def _load_and_compare(root, expected):
    assert_same(torch.load(os.path.join(root, FILES[0])), expected["model"], "model.pt")
    assert_same(torch.load(os.path.join(root, FILES[1])), expected["optimizer"], "optimizer.pt")
    with open(os.path.join(root, FILES[2]), "rb") as f:
        assert_same(torch.load(f), expected, "state.pt")


def test_save_load_roundtrip(ckptfs):
    model, opt, expected = _expected()
    _save(ckptfs.mnt, expected)
    _load_and_compare(ckptfs.mnt, expected)

    # The loaded state resumes training exactly like the original.
    loaded = torch.load(ckptfs.path(FILES[2]))
    model2 = TinyGPT()
    model2.load_state_dict(loaded["model"])
    opt2 = make_optimizer(model2)
    opt2.load_state_dict(loaded["optimizer"])
    train(model, opt, 1, seed=7)
    train(model2, opt2, 1, seed=7)
    assert_same(model2.state_dict(), model.state_dict(), "resumed model")
    assert_same(opt2.state_dict(), opt.state_dict(), "resumed optimizer")

    ckptfs.stop()
    _load_and_compare(ckptfs.backend, expected)
    ckptfs.verify(expect=FILES)
