"""The provider simulator server (`jobgate simulator`): the providers' wire formats, with faults."""
