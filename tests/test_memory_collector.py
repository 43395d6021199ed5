import gc
import threading

import pytest

from dask_gpu.memory.collector import collector_paused


def test_pauses_nest_and_the_collector_runs_again_after_the_last(collector_on):
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()


def test_an_error_ends_the_pause(collector_on):
    with pytest.raises(ZeroDivisionError), collector_paused():
        raise ZeroDivisionError
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off(collector_on):
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_overlapping_pauses_in_two_threads(collector_on):
    inside, release = threading.Event(), threading.Event()

    def other():
        with collector_paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    with collector_paused():
        thread.start()
        assert inside.wait(10)
    assert not gc.isenabled()  # this thread's pause ended first: the other's holds
    release.set()
    thread.join(10)
    assert gc.isenabled()
