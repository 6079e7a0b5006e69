"""task world: what a worker shares and can build, and where each attempt started

Workers record their file system id, the directories they share with submitters, their Python
interpreters and their cached environments; attempts record the world their worker made for them.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'


def upgrade() -> None:
    with op.batch_alter_table('workers') as batch:
        batch.add_column(sa.Column('filesystem', sa.String(64)))
        batch.add_column(sa.Column('shared_fs', sa.JSON()))
        batch.add_column(sa.Column('pythons', sa.JSON()))
        batch.add_column(sa.Column('environments', sa.JSON()))
    with op.batch_alter_table('attempts') as batch:
        batch.add_column(sa.Column('world', sa.JSON()))


def downgrade() -> None:
    with op.batch_alter_table('attempts') as batch:
        batch.drop_column('world')
    with op.batch_alter_table('workers') as batch:
        for column in ('environments', 'pythons', 'shared_fs', 'filesystem'):
            batch.drop_column(column)
