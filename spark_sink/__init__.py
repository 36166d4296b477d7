"""The batch side: PySpark jobs that compact changelog and output topics into
Parquet for audit and replay."""
