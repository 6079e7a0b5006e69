"""run as owners: whether each worker runs tasks as their owners' local accounts (it runs as root), and the account
it runs as itself

Revision ID: 0018
Revises: 0017
"""

import sqlalchemy as sa
from alembic import op

revision = '0018'
down_revision = '0017'


def upgrade() -> None:
    with op.batch_alter_table('workers') as batch:
        batch.add_column(sa.Column('run_as_owners', sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column('account', sa.String(64)))


def downgrade() -> None:
    for column in ('account', 'run_as_owners'):
        op.execute(f'ALTER TABLE workers DROP COLUMN {column}')
