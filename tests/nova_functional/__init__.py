"""Nova 34's accelerator functional tests against the real acceld (see README.md).

Run by ``run.sh`` in Nova's own environment, never by pytest: the test module is not named
``test_*.py``; stestr (unittest discovery) reaches it through ``load_tests`` below.
Nothing is imported here at import time.
"""


def load_tests(loader, standard_tests, pattern):
    from tests.nova_functional import nova_accelerator_tests

    standard_tests.addTests(loader.loadTestsFromModule(nova_accelerator_tests))
    return standard_tests
