from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("inventory", "0008_exactly_once")]

    operations = [
        migrations.CreateModel(
            name="MaintenanceRun",
            fields=[
                ("name", models.CharField(max_length=100, primary_key=True, serialize=False)),
                ("last_run_at", models.DateTimeField()),
                ("outcome", models.JSONField(blank=True, default=dict)),
            ],
        ),
    ]
