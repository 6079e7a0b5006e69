"""project tokens: bearer keys that reach the router's deployments of one project, kept as hashes

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'


def upgrade() -> None:
    op.create_table('project_tokens',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('project', sa.String(length=100), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('token_hash')
    )
    with op.batch_alter_table('project_tokens', schema=None) as batch_op:
        batch_op.create_index('ix_project_tokens_project', ['project'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('project_tokens', schema=None) as batch_op:
        batch_op.drop_index('ix_project_tokens_project')
    op.drop_table('project_tokens')
