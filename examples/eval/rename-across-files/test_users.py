import unittest

import report
import users


class UsersTest(unittest.TestCase):
    def test_lookup(self):
        self.assertEqual(users.get_user(1), "ada")

    def test_line(self):
        self.assertEqual(report.line(3), "user 3: unknown")


if __name__ == "__main__":
    unittest.main()
