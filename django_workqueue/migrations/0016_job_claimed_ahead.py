"""Claim ahead of free slots: a job a worker claimed into its local buffer, whose body has not
begun as far as the database knows. The reaper gives such a job of a dead worker back
uncharged (``budgets.py``: a claimed job that never began spends nothing); a started one is a
crash. A constant default: no table rewrite on PostgreSQL 11+ or SQLite."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("django_workqueue", "0015_workerprocess_liveness_since")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="claimed_ahead",
            field=models.BooleanField(
                db_default=False,
                default=False,
                help_text="Claimed into a worker's local buffer and not begun, as far as the "
                "database knows (read while it runs): if that worker dies it goes back to "
                "ready uncharged.",
            ),
        ),
    ]
