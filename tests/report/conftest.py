from tests.store.conftest import (  # noqa: F401 (fixtures, shared with the store tests)
    backend,
    counts,
    empty_url,
    engine,
    postgres,
    postgres_template,
    postgres_url,
    store_url,
)
