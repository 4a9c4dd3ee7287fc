"""The thread governor (``foldexp/governor.py``): one intra-op thread while other processes
hold the cores, the run's own count once they leave, decided on the median of an interval."""

from __future__ import annotations

from foldexp.governor import ThreadGovernor, runnable_others


class _Machine:
    """A fake load and clock; records the thread counts set."""

    def __init__(self) -> None:
        self.others, self.now, self.set = 0, 0.0, []

    def governor(self, threads: int = 2, cores: int = 2) -> ThreadGovernor:
        return ThreadGovernor(
            threads, cores, 1.0, lambda: self.others, lambda: self.now, self.set.append
        )

    def steps(self, gov: ThreadGovernor, others: int, seconds: float, step_s: float = 0.25):
        self.others = others
        for _ in range(round(seconds / step_s)):
            self.now += step_s
            gov.tick()


def test_load_arriving_mid_run_drops_to_one_thread_and_back() -> None:
    m = _Machine()
    gov = m.governor()
    m.steps(gov, 0, 3.0)
    assert m.set == [] and gov.current == 2
    m.steps(gov, 4, 1.5)  # 4 busy processes on 2 cores
    assert m.set == [1] and gov.current == 1
    m.steps(gov, 4, 5.0)
    assert m.set == [1]  # stays while they stay
    m.steps(gov, 0, 1.5)
    assert m.set == [1, 2] and gov.current == 2 and gov.switches == 2


def test_one_other_process_or_a_blip_changes_nothing() -> None:
    m = _Machine()
    gov = m.governor()
    m.steps(gov, 1, 5.0)  # one other process: the start-up rule's "quiet" too
    m.others = 5
    m.now += 0.25
    gov.tick()  # one busy sample among quiet ones: the interval's median stays low
    m.steps(gov, 1, 0.75)
    assert m.set == []


def test_a_run_that_started_at_one_thread_goes_up_when_quiet() -> None:
    m = _Machine()
    gov = m.governor()
    gov.current = 1  # started on a busy machine
    m.steps(gov, 3, 2.0)
    assert m.set == []
    m.steps(gov, 0, 1.5)
    assert m.set == [2]


def test_nothing_to_govern_with_one_thread_or_no_load_reading() -> None:
    m = _Machine()
    single = m.governor(threads=1)
    m.steps(single, 6, 3.0)
    assert m.set == [] and not single.active
    blind = ThreadGovernor(2, 2, 1.0, lambda: None, lambda: m.now, m.set.append)
    assert not blind.active and blind.tick() is None


def test_runnable_others_reads_loadavg(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "loadavg"
    path.write_text("0.50 0.40 0.30 5/321 12345\n")
    assert runnable_others(str(path)) == 4
    path.write_text("garbage")
    assert runnable_others(str(path)) is None
    assert runnable_others(str(tmp_path / "missing")) is None


def test_the_thresholds_and_the_band_between_them() -> None:
    m = _Machine()
    gov = m.governor()
    m.steps(gov, 1, 3.0)  # cores - 1 others beside 2 threads: stays
    assert m.set == []
    m.steps(gov, 2, 1.0)  # as many others as cores: one thread
    assert m.set == [1]
    m.steps(gov, 1, 3.0)  # one other left: 2 threads would not fit beside it, stays at 1
    assert m.set == [1]
    for _ in range(5):  # a load alternating between the two edges does not flap
        m.steps(gov, 2, 1.0)
        m.steps(gov, 1, 1.0)
    assert m.set == [1]
    m.steps(gov, 0, 1.0)
    assert m.set == [1, 2]


def test_four_cores_leave_room_for_others() -> None:
    m = _Machine()
    gov = m.governor(threads=2, cores=4)
    m.steps(gov, 3, 2.0)
    assert m.set == []
    m.steps(gov, 4, 1.0)
    assert m.set == [1]
    m.steps(gov, 3, 2.0)
    assert m.set == [1]
    m.steps(gov, 2, 1.0)
    assert m.set == [1, 2]
