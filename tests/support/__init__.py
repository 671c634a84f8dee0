"""What the tests share that is not a fixture: request factories, the documentation's blocks, the
previous release, and the host sites (URLconfs) some tests run under."""
