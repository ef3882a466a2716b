"""The peers jobgate is measured against, driven through their own public APIs."""
