"""``python -m rivulet``: the same command line as the ``rivulet`` script."""

from rivulet.cli.main import main

if __name__ == "__main__":
    main()
