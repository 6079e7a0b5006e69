"""cluster state shared by several controllers: settings (the admin and join tokens) and the registry of controllers

Revision ID: 0019
Revises: 0018
"""

import sqlalchemy as sa
from alembic import op

revision = '0019'
down_revision = '0018'


def upgrade() -> None:
    op.create_table(
        'cluster_settings',
        sa.Column('name', sa.String(64), primary_key=True),
        sa.Column('value', sa.Text(), nullable=False),
    )
    op.create_table(
        'controllers',
        sa.Column('id', sa.String(200), primary_key=True),
        sa.Column('url', sa.String(300), nullable=False),
        sa.Column('pid', sa.Integer(), nullable=False),
        sa.Column('host', sa.String(200), nullable=False),
        sa.Column('version', sa.String(50), nullable=False),
        sa.Column('started_at', sa.Float(), nullable=False),
        sa.Column('seen_at', sa.Float(), nullable=False),
        sa.Column('handlers', sa.JSON(), nullable=False),
        sa.Column('last_pass_at', sa.Float()),
    )


def downgrade() -> None:
    op.drop_table('controllers')
    op.drop_table('cluster_settings')
