"""Tests that need real accelerators (``@pytest.mark.gpu``); they skip, with the reason,
on machines without the hardware or its driver."""
