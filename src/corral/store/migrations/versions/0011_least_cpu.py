"""least cpu: reservations below the 0.01 cores a task now must ask for are raised to it

Specs are read back through the same validation as at submission, so a job or deployment stored
with `cpu: 0` before the minimum existed would no longer read.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'

LEAST_CPU = 0.01  # core.spec.MIN_CPU when this migration was written


def upgrade() -> None:
    connection = op.get_bind()
    for name in ('jobs', 'deployments'):
        table = sa.table(name, sa.column('id', sa.Integer), sa.column('spec', sa.JSON))
        for row in connection.execute(sa.select(table.c.id, table.c.spec)).all():
            resources = row.spec.get('resources') or {}
            if resources.get('cpu', LEAST_CPU) < LEAST_CPU:
                spec = {**row.spec, 'resources': {**resources, 'cpu': LEAST_CPU}}
                connection.execute(sa.update(table).where(table.c.id == row.id).values(spec=spec))
    tasks = sa.table('tasks', sa.column('cpu', sa.Float))
    connection.execute(sa.update(tasks).where(tasks.c.cpu < LEAST_CPU).values(cpu=LEAST_CPU))


def downgrade() -> None:
    pass  # the raised reservations are valid before this revision too
